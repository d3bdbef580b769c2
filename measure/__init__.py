"""Where candidates meet hardware: build, check, time."""
