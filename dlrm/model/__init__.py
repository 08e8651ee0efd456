"""The dense part of the recommender (MLPs, interactions) and the model assembling it with embeddings."""
