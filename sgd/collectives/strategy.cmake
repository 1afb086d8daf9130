# The mesh all-reduces (tree, butterfly, master) and the choice between them and the
# ring: part of gossip_sgd (docs/architecture.md).
set(gossip_collectives_sources
  ${CMAKE_CURRENT_LIST_DIR}/algorithm.cc ${CMAKE_CURRENT_LIST_DIR}/mesh_wire.cc
  ${CMAKE_CURRENT_LIST_DIR}/contributions.cc ${CMAKE_CURRENT_LIST_DIR}/tree_all_reduce.cc
  ${CMAKE_CURRENT_LIST_DIR}/butterfly_all_reduce.cc ${CMAKE_CURRENT_LIST_DIR}/choice.cc)
target_sources(gossip_sgd PRIVATE ${gossip_collectives_sources})
# Their add and divide loops: vectorized at -O3 (GCC 12 does not at -O2).
set_source_files_properties(${gossip_collectives_sources} PROPERTIES COMPILE_OPTIONS "-O3")
