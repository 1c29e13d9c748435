"""The worker's stages, one module each (schedules a package of its parts): hosts, schedules,
dispatcher, control.

`streams.app` wires them into one Faust app (and its one timer) and owns nothing else.
"""
