"""The bundled hardware profiles: one YAML file per machine, and `README.md`, their key reference.

A package only so that the files ship inside the wheel and are found through `importlib.resources` from any working
directory; it holds no code.  `planner.data` maps a ``--hw`` name to one of these files.
"""
