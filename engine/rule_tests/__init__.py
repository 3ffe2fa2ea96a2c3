"""Rule tests (`gpuslo rules test`): `files` reads `<name>.test.yaml` into frozen cases, `run` evaluates them."""
