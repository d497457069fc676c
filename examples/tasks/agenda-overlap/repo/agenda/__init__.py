"""A one-day agenda of meetings, in minutes since midnight."""
