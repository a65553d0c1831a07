"""Things that change the world: kill, reservations."""
