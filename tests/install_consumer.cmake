# Installs the built library into a temporary prefix, checks that its headers name no internals,
# then configures, builds (every installed header on its own and a small program, with -Wall
# -Wextra -Wpedantic -Werror) and runs tests/consumer against it through find_package(relpos).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
# The installed headers name none of the runtime's internals.
file(GLOB headers ${prefix}/include/relpos/*.hpp)
foreach(header IN LISTS headers)
  file(STRINGS ${header} internal REGEX "detail")
  if(internal)
    message(FATAL_ERROR "${header} names internals: ${internal}")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DRELPOS_PREFIX=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)

# A version newer than the installed one is refused by find_package.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build-newer -G ${GENERATOR}
                        -DCMAKE_PREFIX_PATH=${prefix} -DRELPOS_PREFIX=${prefix} -DRELPOS_WANTED=0.3
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0 OR NOT out MATCHES "0\\.2\\.0")
  message(FATAL_ERROR "find_package(relpos 0.3) should fail against 0.2.0, naming it:\n${out}")
endif()

# A machine without MPI still finds the package (relpos::relpos needs none): a FindMPI that finds
# nothing stands in for it; the configure is what failed.
file(WRITE ${WORK_DIR}/no-mpi/FindMPI.cmake "set(MPI_FOUND FALSE)\nset(MPI_CXX_FOUND FALSE)\n")
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build-no-mpi -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix}
    -DRELPOS_PREFIX=${prefix} -DCMAKE_MODULE_PATH=${WORK_DIR}/no-mpi)

# pkg-config: the same program, compiled and linked with nothing but relpos.pc's flags.
find_program(PKG_CONFIG pkg-config REQUIRED)
file(GLOB_RECURSE pc_files ${prefix}/*/relpos.pc)
list(LENGTH pc_files n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one installed relpos.pc, found: ${pc_files}")
endif()
cmake_path(GET pc_files PARENT_PATH pc_dir)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND ${PKG_CONFIG} --modversion relpos OUTPUT_VARIABLE pc_version OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
if(NOT pc_version STREQUAL "0.2.0")
  message(FATAL_ERROR "relpos.pc says version ${pc_version}")
endif()
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs --static relpos OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
find_program(CXX NAMES c++ g++ REQUIRED)
run(${CXX} ${SOURCE_DIR}/tests/consumer/main.cpp -o ${WORK_DIR}/pkg_config_consumer ${pc_flags})
run(${WORK_DIR}/pkg_config_consumer)

# The shared library (RELPOS_SHARED=ON) carries its major version as SOVERSION: configured only (its
# link rule names the soname), since building the library twice would double the suite's build.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/shared -G Ninja -DRELPOS_SHARED=ON -DRELPOS_BUILD_TESTS=OFF -DRELPOS_BUILD_TOOLS=OFF)
file(READ ${WORK_DIR}/shared/build.ninja ninja)
if(NOT ninja MATCHES "SONAME = librelpos\\.so\\.0\n" OR NOT ninja MATCHES "TARGET_FILE = librelpos\\.so\\.0\\.2\\.0\n")
  message(FATAL_ERROR "the shared library's link rule gives no soname librelpos.so.0 (SOVERSION) or file librelpos.so.0.2.0")
endif()
