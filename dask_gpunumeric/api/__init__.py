"""What users call: argument validation, dtype rules and guards, building expressions; the Array class."""
