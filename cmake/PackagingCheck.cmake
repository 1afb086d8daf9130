# Included by cpack (CPACK_PROJECT_CONFIG_FILE). The packages install under /usr, but the
# library and CMake-package paths were fixed when the build was configured: with another
# prefix GNUInstallDirs chose lib/ instead of Debian's lib/<multiarch>/, and the packages
# would put libgossip where a multiarch system does not look first.
if(CPACK_GENERATOR STREQUAL "DEB" AND NOT CPACK_GOSSIP_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "gossipd: configure the build with -DCMAKE_INSTALL_PREFIX=/usr before "
                      "cpack (it has ${CPACK_GOSSIP_INSTALL_PREFIX}, libdir "
                      "${CPACK_GOSSIP_LIBDIR}); scripts/build-packages.sh does")
endif()
