"""Ground floor: atomic files, error types, failpoints, wording."""
