"""Real concurrency: threads and spawn processes coordinating through a real Redis."""
