//! Topologies (cartesian, graph, distributed graph) and neighbour collectives.
