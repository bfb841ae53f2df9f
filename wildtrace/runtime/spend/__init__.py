"""Money: the spend cap for the whole command, its durable journal, reservations and settling (cap)."""
