# cmake -DIN=<file.spv> -DOUT=<file.inc> -P SpvToInc.cmake
# Writes the SPIR-V words as comma-separated C literals (SPIR-V is little-endian words).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR rem "${n} % 8")
if(NOT rem EQUAL 0 OR n EQUAL 0)
  message(FATAL_ERROR "${IN} is not a whole number of 32-bit words")
endif()
string(REGEX REPLACE "(..)(..)(..)(..)" "0x\\4\\3\\2\\1u," words "${hex}")
string(REGEX REPLACE "((0x........u,){8})" "\\1\n" words "${words}")
file(WRITE ${OUT} "${words}\n")
