"""The scheduler: decides which episodes to start (`core`), and the Kafka process that starts them."""
