"""``python -m airflow_copycat.cli``: the ``copycat`` command."""

import sys

from . import main

sys.exit(main())
