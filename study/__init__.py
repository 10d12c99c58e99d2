"""study: specs -> Ray Tune trials (+ Optuna) -> MLflow runs. Imports locattn and record.

Its sub-packages, in import order: ``cost`` (the cost model), ``spec`` (YAML -> ``StudySpec``,
run keys, plugins, retention), ``trial`` (what one Tune trial trains), ``recording`` (``study.json``,
run folders, status, the Tune callbacks that record), ``plan`` (the Tuner's trials and searcher),
``driver`` (the driver process: launch, resume, export); ``cli`` is the ``study`` command.

Importing this package starts nothing. It only asks Ray (read when ``ray`` is first imported)
to keep a locally started cluster on the loopback address; see :func:`study.driver.process.init_ray`.
"""

import os as _os

_os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
