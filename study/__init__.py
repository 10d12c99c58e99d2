"""study: specs -> Ray Tune trials (+ Optuna) -> MLflow runs. Imports locattn and record.

Importing this package starts nothing. It only asks Ray (read when ``ray`` is first imported)
to keep a locally started cluster on the loopback address; see :func:`study.driver.init_ray`.
"""

import os as _os

_os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
