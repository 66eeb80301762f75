# Writes OUT: dashboard/page.html as a C++ raw string (DashboardPage()). Run by the build
# whenever page.html changes.
file(READ ${PAGE} content)
string(FIND "${content}" ")NWPAGE\"" bad)
if(NOT bad EQUAL -1)
  message(FATAL_ERROR "${PAGE} contains the raw-string delimiter )NWPAGE\"")
endif()
file(WRITE ${OUT} "// Generated from dashboard/page.html by dashboard/embed_page.cmake.\n"
                  "#include \"dashboard/server.h\"\n\n"
                  "namespace nw::dashboard {\n\n"
                  "std::string_view DashboardPage() {\n"
                  "  static constexpr char kPage[] = R\"NWPAGE(${content})NWPAGE\";\n"
                  "  return std::string_view(kPage, sizeof(kPage) - 1);\n"
                  "}\n\n"
                  "}  // namespace nw::dashboard\n")
