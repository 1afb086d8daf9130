# Debian packages, one per install component or group (cpack -G DEB in a build folder configured
# with CMAKE_INSTALL_PREFIX=/usr; scripts/build-packages.sh does both):
#   gossipd       (group gossipd: components daemon and systemd) gossipd, gossipctl,
#                 gossip-train, examples; the systemd unit, the system user (sysusers.d),
#                 /run/gossipd (tmpfiles.d)
#   libgossip0    (runtime)  libgossip.so.0*: what a trainer loads (the C ABI, ctypes)
#   libgossip-dev (dev)      headers, the libgossip.so link, CMake package, pkg-config file

# The files that only make sense system-wide: component systemd, EXCLUDE_FROM_ALL so that
# a plain `cmake --install --prefix /usr/local` leaves no unit (whose ExecStart is
# /usr/bin/gossipd) and no sysusers.d entry where systemd would read them. They go under
# lib/ and share/ of the prefix, never /etc: a package without conffiles has nothing for
# dpkg to ask about on upgrade, and the admin writes /etc/gossipd/<id>.toml.
set(GOSSIP_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR}/../packaging)
install(FILES ${GOSSIP_PACKAGING_DIR}/systemd/gossipd@.service
        DESTINATION lib/systemd/system COMPONENT systemd EXCLUDE_FROM_ALL)
install(FILES ${GOSSIP_PACKAGING_DIR}/systemd/gossipd.sysusers
        DESTINATION lib/sysusers.d RENAME gossipd.conf COMPONENT systemd EXCLUDE_FROM_ALL)
install(FILES ${GOSSIP_PACKAGING_DIR}/systemd/gossipd.tmpfiles
        DESTINATION lib/tmpfiles.d RENAME gossipd.conf COMPONENT systemd EXCLUDE_FROM_ALL)
install(FILES ${GOSSIP_PACKAGING_DIR}/node.toml ${PROJECT_SOURCE_DIR}/daemon/gossipd.example.toml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/gossipd/examples COMPONENT daemon)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gossipd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})  # the one every --version prints
# Whoever builds the packages to hand them out signs them with a real address.
set(GOSSIP_PACKAGE_MAINTAINER "gossipd maintainers <gossipd@example.org>" CACHE STRING
    "the Maintainer field of the Debian packages")
set(CPACK_PACKAGE_CONTACT "${GOSSIP_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_STRIP_FILES ON)  # the build keeps line tables (-g1); the packages need none
set(CPACK_COMPONENTS_ALL daemon systemd runtime dev)
# Read by cmake/PackagingCheck.cmake when cpack runs, not by CMake.
set(CPACK_GOSSIP_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_GOSSIP_LIBDIR ${CMAKE_INSTALL_LIBDIR})
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_CURRENT_LIST_DIR}/PackagingCheck.cmake)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # name_version-release_arch.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# dpkg-shlibdeps (dpkg-dev, which build-essential pulls in) turns each ELF file's
# NEEDED libraries into the Debian packages that provide them, with their versions.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # libgossip0's shlibs file, for trainers' packages
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)  # dev -> runtime of the same version
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)  # maintainer scripts 0755

set(CPACK_DEBIAN_GOSSIPD_PACKAGE_NAME gossipd)
set(CPACK_DEBIAN_GOSSIPD_PACKAGE_SECTION net)
set(CPACK_DEBIAN_GOSSIPD_PACKAGE_SUGGESTS dataset-fashion-mnist)  # gossip-train's data
set(CPACK_DEBIAN_GOSSIPD_DESCRIPTION
    "daemon for decentralized data-parallel training
gossipd runs on every node of a training cluster. The trainers of a node
attach to it over a local socket and train in place in a shared-memory
arena; the daemons keep the nodes' models close together (local SGD,
gossip, CHOCO-SGD, push-sum, all-reduce). With gossipctl, the reference
trainer gossip-train and the systemd unit gossipd@.service.")
set(CPACK_DEBIAN_GOSSIPD_PACKAGE_CONTROL_EXTRA
    ${GOSSIP_PACKAGING_DIR}/debian/postinst ${GOSSIP_PACKAGING_DIR}/debian/prerm
    ${GOSSIP_PACKAGING_DIR}/debian/postrm)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libgossip0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "gossipd's trainer library
libgossip.so.0: the C ABI and the C++ client with which a trainer
attaches to its node's gossipd (the Python client loads it via ctypes).")
# The dynamic linker's cache is refreshed by libc-bin's trigger. (CPack adds its own
# ldconfig call in postinst and postrm all the same.)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${GOSSIP_PACKAGING_DIR}/debian/triggers)

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libgossip-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_DESCRIPTION
    "gossipd's trainer library (development files)
Headers (gossip/gossip.h, gossip/client.h), the CMake package
(find_package(gossipd CONFIG), target gossipd::client) and the
pkg-config file gossipd.pc, to build a trainer against libgossip.")

include(CPack)
cpack_add_component(runtime)
cpack_add_component(dev DEPENDS runtime)
cpack_add_component_group(gossipd)
cpack_add_component(daemon GROUP gossipd)
cpack_add_component(systemd GROUP gossipd)
