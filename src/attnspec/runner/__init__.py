"""Running a subject: the engine, the supervised worker, the wire, the report."""
