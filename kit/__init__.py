"""The shared kit: Django and REST plumbing that every app uses and that knows no app."""
