"""The worker's stages, one module each: hosts, schedules, dispatcher, control.

`streams.app` wires them into one Faust app (and its one timer) and owns nothing else.
"""
