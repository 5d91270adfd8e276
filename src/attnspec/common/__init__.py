"""The ground floor, which every layer may import: the run's options, the report's schema, the
worker protocol (what the runner asks a worker or rank for, and what it accepts back) and the
dtype table. It imports nothing of attnspec's but the reference's key names and the errors."""
