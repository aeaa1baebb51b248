"""Rule files shipped as package data (TOML, one rule per file)."""
