# `cmake --install`: the library, the cpgen command, the public headers, the shipped caches, and a
# CMake package (find_package(cpgen) -> target cpgen::cpgen). Included from CMakeLists.txt after
# the targets exist.
include(CMakePackageConfigHelpers)

set(CPGEN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/cpgen CACHE STRING
    "Where the cpgen CMake package files are installed, relative to the prefix")

# The exported name is cpgen::cpgen, the same as the in-tree alias, so user code is identical
# whether it uses add_subdirectory or find_package.
set_target_properties(cpgen PROPERTIES EXPORT_NAME cpgen)
install(TARGETS cpgen EXPORT cpgenTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS cpgen_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/cpgen
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/caches)
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/caches/
    DESTINATION ${CMAKE_INSTALL_DATADIR}/cpgen/caches FILES_MATCHING PATTERN "*.json")
endif()

install(EXPORT cpgenTargets NAMESPACE cpgen:: DESTINATION ${CPGEN_INSTALL_CMAKEDIR})
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/cpgenConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cpgenConfig.cmake
  INSTALL_DESTINATION ${CPGEN_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/cpgenConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cpgenConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cpgenConfigVersion.cmake
  DESTINATION ${CPGEN_INSTALL_CMAKEDIR})
