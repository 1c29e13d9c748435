"""The worker's stages, one module each: hosts, dispatcher, control.

The schedule stage (`streams.schedule_stage`) sits beside them; `streams.app` wires them into
one Faust app and owns nothing else.
"""
