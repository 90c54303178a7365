"""DataModules: datasets, seeded splits, loaders and graph corruptions."""
