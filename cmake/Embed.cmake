# Kernel templates and search spaces are compiled into the core library so that
# the mlatune program works from any directory; files on disk still take
# precedence when a space names them (see core/embedded.h).
#
# mlatune_embed_files(OUT_VAR glob...) generates one .cpp that registers each
# file under its path relative to the source root (e.g. "templates/x.cu").
function(mlatune_embed_files out_var)
  file(GLOB files CONFIGURE_DEPENDS ${ARGN})
  list(SORT files)
  set(generated ${CMAKE_BINARY_DIR}/generated/embedded_files.cpp)
  add_custom_command(
    OUTPUT ${generated}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${generated} -DROOT=${CMAKE_SOURCE_DIR}
            "-DFILES=${files}" -P ${CMAKE_SOURCE_DIR}/cmake/EmbedScript.cmake
    DEPENDS ${files} ${CMAKE_SOURCE_DIR}/cmake/EmbedScript.cmake
    COMMENT "Embedding kernel templates and search spaces"
    VERBATIM)
  set(${out_var} ${generated} PARENT_SCOPE)
endfunction()
