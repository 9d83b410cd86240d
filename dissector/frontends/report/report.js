document.querySelectorAll('input.filter').forEach(function (box) {
  box.addEventListener('input', function () {
    var want = box.value.toLowerCase();
    var rows = document.getElementById(box.dataset.table).querySelectorAll('tr');
    rows.forEach(function (row, i) {
      if (i === 0) { return; }
      var text = (row.dataset.text || '') + ' ' + row.textContent;
      row.style.display = text.toLowerCase().indexOf(want) >= 0 ? '' : 'none';
    });
  });
});
