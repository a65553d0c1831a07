"""Where snapshots come from. No Textual, no printing."""
