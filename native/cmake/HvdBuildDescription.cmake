# Loads the build description: the one file Python hands CMake for a variant.
#
# -DHVD_BUILD_DESCRIPTION=FILE names a script written by
# `python -m selector_backend cmake-config --write FILE` (the backend, the CI
# builder and the plugin's standalone build always pass one). Without it, a
# developer's plain `cmake -S . -B build [-DHVD_TARGET=x86_64_v3 ...]` runs
# that command once, here, forwarding every HVD_* cache variable: Python
# decides which are axes and fills in the catalog's defaults. Either way the
# rest of the build reads only the variables the description sets (see
# selector_backend/install/cmake_config.py) and never asks Python again.
#
# Include after project(): the compiler check needs the C++ compiler.

set(HVD_BUILD_DESCRIPTION "" CACHE FILEPATH "build description from python -m selector_backend cmake-config")
if(HVD_BUILD_DESCRIPTION)
  if(NOT EXISTS "${HVD_BUILD_DESCRIPTION}")
    message(FATAL_ERROR "HVD_BUILD_DESCRIPTION=${HVD_BUILD_DESCRIPTION} does not exist; write it with "
                        "python -m selector_backend cmake-config --write FILE AXIS=VALUE ...")
  endif()
  set(_hvd_description "${HVD_BUILD_DESCRIPTION}")
else()
  if(NOT Python_EXECUTABLE)
    find_package(Python 3.10 REQUIRED COMPONENTS Interpreter)
  endif()
  get_filename_component(_hvd_source_root "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
  get_cmake_property(_hvd_cache CACHE_VARIABLES)
  set(_hvd_request "")
  foreach(_hvd_var IN LISTS _hvd_cache)
    if(_hvd_var MATCHES "^HVD_" AND NOT _hvd_var STREQUAL "HVD_BUILD_DESCRIPTION")
      list(APPEND _hvd_request "${_hvd_var}=${${_hvd_var}}")
    endif()
  endforeach()
  # Keep the caller's PYTHONPATH: pip's isolated build environment reaches its
  # build requirements (archspec, packaging) through it.
  set(_hvd_pythonpath "${_hvd_source_root}")
  if(DEFINED ENV{PYTHONPATH} AND NOT "$ENV{PYTHONPATH}" STREQUAL "")
    string(APPEND _hvd_pythonpath ":$ENV{PYTHONPATH}")
  endif()
  set(_hvd_description "${CMAKE_BINARY_DIR}/build_description.cmake")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${_hvd_pythonpath}"
            "${Python_EXECUTABLE}" -m selector_backend cmake-config --write "${_hvd_description}"
            --cxx "${CMAKE_CXX_COMPILER}" ${_hvd_request}
    RESULT_VARIABLE _hvd_rc
    ERROR_VARIABLE _hvd_err
    ERROR_STRIP_TRAILING_WHITESPACE)
  if(NOT _hvd_rc EQUAL 0)
    message(FATAL_ERROR "${_hvd_err}")
  endif()
  # A changed catalog or rule reconfigures (and so re-describes) the build.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_hvd_source_root}/variants/catalog.toml"
                                                                 "${_hvd_source_root}/selector_backend/install/cmake_config.py")
endif()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_hvd_description}")
include("${_hvd_description}")

if(NOT HVD_DESCRIPTION_FORMAT STREQUAL "1")
  message(FATAL_ERROR "${_hvd_description} is not a build description this CMakeLists.txt reads "
                      "(format '${HVD_DESCRIPTION_FORMAT}', need 1); rewrite it with this checkout's "
                      "python -m selector_backend cmake-config")
endif()
# The flags are archspec's for one compiler: building with another would be a different binary.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL HVD_CXX_COMPILER_ID
   OR NOT CMAKE_CXX_COMPILER_VERSION VERSION_EQUAL HVD_CXX_COMPILER_VERSION)
  message(FATAL_ERROR "the build description was made for ${HVD_CXX_COMPILER_ID} ${HVD_CXX_COMPILER_VERSION} but "
                      "CMake's C++ compiler is ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} "
                      "(${CMAKE_CXX_COMPILER}): rewrite it with python -m selector_backend cmake-config "
                      "--cxx ${CMAKE_CXX_COMPILER}, or build with the compiler it names")
endif()
message(STATUS "hvd-selector variant: ${HVD_VARIANT_STRING} (flags: ${HVD_TARGET_FLAGS})")
