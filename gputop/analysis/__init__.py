"""Pure functions over snapshots: no I/O."""
