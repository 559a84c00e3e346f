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
