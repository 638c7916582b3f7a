"""Problems in and out: files (YAML, JSON, .npz), samples, random and integer problems."""
