"""`graphmem check`: budgets a model must hold, checked against its analysis (exit code 0/1)."""
