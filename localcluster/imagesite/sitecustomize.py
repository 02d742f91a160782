"""Makes the modules named in ``SIGNAL_LOCAL_ABSENT_MODULES`` unimportable in this process, as
they are in Signal's images (localcluster/imageenv.py puts this directory on PYTHONPATH).

``site`` imports this module after it has set up the virtual environment's paths; an import of
a module set to None in ``sys.modules`` raises ImportError, which is what an optional import
sees where the package is not installed."""

import os
import sys

for _name in os.environ.get("SIGNAL_LOCAL_ABSENT_MODULES", "").split(","):
    if _name and _name not in sys.modules:
        sys.modules[_name] = None  # type: ignore[assignment]
