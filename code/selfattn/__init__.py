"""selfattn: self-attention, verified."""
