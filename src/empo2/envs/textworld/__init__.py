"""TextWorld games generated locally (coin collector, treasure hunter, cooking); docs/environments.md."""
