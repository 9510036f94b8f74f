"""Exit statuses of the ``empo2`` command line (docs/reliability.md, "Exit status").

A module of its own so that a command module (``empo2.cli.train``) can name them without importing
``empo2.cli``, which imports the command modules (docs/architecture.md, "Import rules and the lint gate");
``empo2.cli`` re-exports both.
"""

from __future__ import annotations

USER_ERROR = 2
"""Exit status of a bad input (config, path, model, checkpoint, memory file): nothing was run."""
RUN_FAILED = 3
"""Exit status of a run that started but could not finish its work: every episode crashed, or the
final checkpoint could not be written (the message says what is kept and how to continue)."""
