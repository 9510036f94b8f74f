"""TextWorldExpress games (Java): coin, cookingworld, twc, mapreader, …; docs/environments.md.

Modules: ``env`` (``TWXGame``, the ``TextGame``; ``check_java``), ``tasks`` (games, parameters, task
names), ``jvm`` (finding Java, one JVM per instance), ``prompts`` and ``config`` (``TWXConfig``, light).
"""
