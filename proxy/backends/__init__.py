"""What a chosen backend is sent and how its answer becomes chunk frames, one
module per backend protocol: ``fbs`` (the untouched bytes)."""
