"""Results read back from run folders, verdicts, tables, figures and published reference numbers."""
