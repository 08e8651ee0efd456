"""Reading split-binary datasets: the prefetching, rank-slicing batch reader, its decode kernels (numpy
reference and compiled), and the start-up check of every value with the same kernels."""
