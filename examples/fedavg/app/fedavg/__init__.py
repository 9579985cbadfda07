"""FedAvg logistic regression in numpy: the example job of docs/writing-jobs.md."""
