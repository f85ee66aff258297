"""Example functions shipped with the Worker (the default FUNCTIONS_DIR)."""
