"""Storage: ports (typed interfaces), the one schema definition, and the boto3 adapters."""
