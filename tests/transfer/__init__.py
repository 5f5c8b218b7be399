"""Transfer tests: limits, faults, round trips, directories, memory."""
