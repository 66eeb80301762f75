# nw_library(NAME GLOBS <patterns...> [EXCLUDE <files...>] [PUBLIC <deps...>])
# A static library made of the sources matching GLOBS but not listed in EXCLUDE (re-globbed on
# every build). A room with no
# sources yet becomes an INTERFACE library, so the rest of the tree still configures.
function(nw_library name)
  cmake_parse_arguments(A "" "" "GLOBS;EXCLUDE;PUBLIC" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${A_GLOBS})
  if(A_EXCLUDE)
    list(REMOVE_ITEM srcs ${A_EXCLUDE})
  endif()
  if(NOT srcs)
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE ${A_PUBLIC})
    return()
  endif()
  add_library(${name} ${srcs})
  target_link_libraries(${name} PUBLIC ${A_PUBLIC} PRIVATE nw_warnings)
endfunction()
