# Local SGD (and DiLoCo's outer optimizer): part of gossip_sgd (docs/architecture.md, "Adding a strategy").
target_sources(gossip_sgd PRIVATE ${CMAKE_CURRENT_LIST_DIR}/local_sgd.cc)
