# The parameter-server strategy: part of gossip_sgd (docs/architecture.md, "Adding a strategy").
target_sources(gossip_sgd PRIVATE ${CMAKE_CURRENT_LIST_DIR}/parameter_server.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/parameter_server_replicas.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/options.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/server_optimizer.cc)
