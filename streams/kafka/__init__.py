"""The Kafka plumbing every worker shares: topics and their creation, the request-serving loop, readers."""
