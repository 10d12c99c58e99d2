"""``python -m locattn`` runs the command line (see :mod:`locattn.cli`)."""

import sys

from locattn.cli import main

sys.exit(main())
