"""Reading results back: summaries and paired statistics, drift and degeneracy, plots, tune advice and transfer."""
