"""An environment served by OpenEnv, played as a plug-in environment (optional extra ``openenv``)."""
