"""What the tests share: servers, backends, fault injection, process bodies
and the helpers more than one test module uses. Test modules import from
here, never from one another."""
