"""Framework integrations, each an optional extra of anarchon-core.

- `anarchon.integrations.starlette` (`pip install anarchon-core[starlette]` or `[fastapi]`): lifespans.
- `anarchon.integrations.django` (`pip install anarchon-core[django]`): settings, an AppConfig that
  starts the scheduler in a thread, and `manage.py anarchon run|status`.
"""

__all__: list[str] = []
