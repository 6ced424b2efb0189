"""Generated from schema/ by ``make generate``; do not edit."""
