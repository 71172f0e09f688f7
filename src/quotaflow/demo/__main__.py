"""``python -m quotaflow.demo``."""

from quotaflow.demo.main import main

raise SystemExit(main())
