# Crossbow's synchronous model averaging, --strategy sma: part of gossip_sgd (docs/architecture.md, "Adding a strategy").
target_sources(gossip_sgd PRIVATE ${CMAKE_CURRENT_LIST_DIR}/sma.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/options.cc)
